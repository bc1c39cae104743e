import { library } from '../../tsup.base';

export default library();
